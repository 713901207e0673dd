//! Webhooks on the real server: subscriptions on the admin listener and
//! the command line; deliveries that are the change feed in order,
//! batched and signed (each verified by the Standard Webhooks reference
//! library), retried with the same `webhook-id`, disabled by `410`,
//! `failing` after the retry window and resumed where they stopped;
//! filters and operations; destinations refused by class; a host killed
//! mid-delivery losing nothing; a hanging receiver delaying only itself;
//! and one organization's changes never reaching another's subscription
//! (`isolation.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common;

use common::receiver::{Delivery, Receiver};
use common::{Server, plugins_dir, python_dir, venv_program, wait_until, xz_finding};
use reqwest::Method;
use serde_json::{Value, json};

/// What the tests' servers need: loopback receivers over http.
pub(crate) const LOOPBACK: [&str; 2] = ["--webhooks-allow-http", "--webhooks-allow-private"];

pub(crate) fn endpoint(hostname: &str) -> Value {
    json!({"hostname": hostname, "operating_system": {"name": "Debian 12", "family": "linux"}, "tags": ["hooks"]})
}

pub(crate) fn import(server: &Server, organization: &str, collection: &str, lines: &[Value]) -> Vec<String> {
    let response = server.import_lines(organization, collection, lines);
    assert_eq!(response.status(), 200, "import refused: {}", response.text().unwrap_or_default());
    let summary: Value = response.json().unwrap();
    summary["ids"].as_array().unwrap().iter().map(|id| id.as_str().unwrap().to_owned()).collect()
}

fn hooks(organization: &str) -> String {
    format!("/admin/v1/organizations/{organization}/webhooks")
}

pub(crate) fn subscribe(server: &Server, organization: &str, body: Value) -> Value {
    let response = server.admin(Method::POST, &hooks(organization)).json(&body).send().unwrap();
    assert_eq!(response.status(), 201, "{}", response.text().unwrap_or_default());
    response.json().unwrap()
}

fn show(server: &Server, organization: &str, id: &str) -> Value {
    let response = server.admin(Method::GET, &format!("{}/{id}", hooks(organization))).send().unwrap();
    assert_eq!(response.status(), 200);
    response.json().unwrap()
}

/// The organization's latest sequence, as a list answers it (every key
/// here reads endpoints).
pub(crate) fn latest_sequence(server: &Server, key: &str) -> u64 {
    let page: Value =
        server.client.get(server.url("/v1/endpoints?limit=1")).bearer_auth(key).send().unwrap().json().unwrap();
    page["sequence"].as_u64().unwrap()
}

/// Every event after `after`, as `/v1/changes` shows it.
fn feed_after(server: &Server, key: &str, after: u64, collections: &str) -> Vec<Value> {
    let mut events = Vec::new();
    let mut path = format!("/v1/changes?after={after}&limit=1000&collection={collections}");
    loop {
        let page: Value = server.client.get(server.url(&path)).bearer_auth(key).send().unwrap().json().unwrap();
        events.extend(page["data"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/changes?cursor={cursor}&collection={collections}"),
            None => return events,
        }
    }
}

/// Each delivery verified by the Standard Webhooks reference library with
/// `secret`: whether it passed, in order.
fn verified_with(secret: &str, deliveries: &[Delivery]) -> Vec<bool> {
    let request = json!({
        "secret": secret,
        "deliveries": deliveries.iter().map(|delivery| json!({
            "headers": delivery.headers,
            "body": String::from_utf8(delivery.body.clone()).unwrap(),
        })).collect::<Vec<_>>(),
    });
    let mut child = Command::new(venv_program("python"))
        .arg(python_dir().join("verify_webhooks.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(request.to_string().as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    let results: Vec<Value> =
        String::from_utf8(output.stdout).unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert_eq!(results.len(), deliveries.len());
    results.iter().map(|result| result["ok"] == true).collect()
}

#[test]
fn subscriptions_are_checked_shown_without_their_secret_and_work_from_the_command_line() {
    let server = Server::start_with(&plugins_dir(), &LOOPBACK);
    let (organization, _) = server.organization_with_key("Hooks", &["findings:read"]);
    let created = subscribe(
        &server,
        &organization,
        json!({
            "url": "http://127.0.0.1:9/hook", "collections": ["vulnerability-findings"],
            "filters": {"vulnerability-findings": "severity=critical&kev=true"}, "description": "SOAR",
        }),
    );
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_") && secret.len() > 40, "{secret}");
    assert_eq!(created["state"], "active");
    assert_eq!(created["operations"], json!(["created", "updated", "deleted"]));
    let id = created["id"].as_str().unwrap();
    let shown = show(&server, &organization, id);
    assert!(shown.get("secret").is_none() && !shown.to_string().contains(&secret));
    assert_eq!(shown["filters"]["vulnerability-findings"], "severity=critical&kev=true");
    let listed: Value = server.admin(Method::GET, &hooks(&organization)).send().unwrap().json().unwrap();
    assert_eq!(listed["data"].as_array().unwrap().len(), 1);
    assert!(!listed.to_string().contains(&secret));

    // Bad input: each member named, nothing stored.
    for (body, field, reason) in [
        (json!({"collections": ["endpoints"]}), "url", "required"),
        (json!({"url": "ftp://x.example/", "collections": ["endpoints"]}), "url", "must be https"),
        (json!({"url": "http://127.0.0.1:9/", "collections": ["devices"]}), "collections", "no collection"),
        (
            json!({"url": "http://127.0.0.1:9/", "collections": ["endpoints"], "operations": ["renamed"]}),
            "operations",
            "created",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "collections": ["vulnerability-findings"],
                   "filters": {"vulnerability-findings": "severity=apocalyptic"}}),
            "filters.vulnerability-findings.severity",
            "not one of",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "collections": ["endpoints"],
                   "filters": {"vulnerability-findings": "severity=critical"}}),
            "filters.vulnerability-findings",
            "does not receive",
        ),
        (json!({"url": "http://127.0.0.1:9/", "collections": ["endpoints"], "secret": "mine"}), "secret", "unknown"),
    ] {
        let response = server.admin(Method::POST, &hooks(&organization)).json(&body).send().unwrap();
        assert_eq!(response.status(), 400, "{body}");
        assert_eq!(response.headers()["content-type"], "application/problem+json");
        let problem: Value = response.json().unwrap();
        let named = problem["invalid_params"]
            .as_array()
            .unwrap()
            .iter()
            .any(|param| param["name"] == field && param["reason"].as_str().unwrap().contains(reason));
        assert!(named, "{body}: {problem}");
    }
    let listed: Value = server.admin(Method::GET, &hooks(&organization)).send().unwrap().json().unwrap();
    assert_eq!(listed["data"].as_array().unwrap().len(), 1);
    // Another organization does not see it.
    let (other, _) = server.organization_with_key("Other", &["findings:read"]);
    let response = server.admin(Method::GET, &format!("{}/{id}", hooks(&other))).send().unwrap();
    assert_eq!(response.status(), 404);

    // The command line: create (the secret alone on standard output), list,
    // pause, rotate, delete.
    let output = server.cli(&[
        "webhooks",
        "create",
        "--organization",
        &organization,
        "--url",
        "http://127.0.0.1:9/cli",
        "--collection",
        "endpoints",
        "--operation",
        "deleted",
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let cli_secret = String::from_utf8(output.stdout).unwrap().trim().to_owned();
    assert!(cli_secret.starts_with("whsec_"), "{cli_secret}");
    let output = server.cli(&["webhooks", "list", "--organization", &organization]);
    let listing = String::from_utf8(output.stdout).unwrap();
    assert!(listing.contains("http://127.0.0.1:9/cli") && listing.contains("active"), "{listing}");
    let cli_id =
        listing.lines().find(|line| line.contains("/cli")).unwrap().split_whitespace().next().unwrap().to_owned();
    let output = server.cli(&["webhooks", "update", "--organization", &organization, &cli_id, "--state", "paused"]);
    assert!(String::from_utf8(output.stdout).unwrap().contains("paused"));
    let output = server.cli(&["webhooks", "rotate-secret", "--organization", &organization, &cli_id]);
    let rotated = String::from_utf8(output.stdout).unwrap().trim().to_owned();
    assert!(rotated.starts_with("whsec_") && rotated != cli_secret);
    assert!(show(&server, &organization, &cli_id)["previous_secret_expires_at"].is_string());
    let output = server.cli(&["webhooks", "delete", "--organization", &organization, &cli_id]);
    assert!(output.status.success());
    let response = server.admin(Method::GET, &format!("{}/{cli_id}", hooks(&organization))).send().unwrap();
    assert_eq!(response.status(), 404);

    // No secret reaches the log.
    let log = server.log();
    for shown_once in [&secret, &cli_secret, &rotated] {
        assert!(!log.contains(shown_once.as_str()), "a secret is in the log");
    }
    assert_eq!(server.metric_sum("esr_webhook_subscriptions{state=\"active\"}"), 1.0);
}

#[test]
fn deliveries_are_the_feed_in_order_batched_and_signed() {
    let server = Server::start_with(&plugins_dir(), &LOOPBACK);
    let (organization, key) = server.organization_with_key("Feed", &["endpoints:read", "findings:read"]);
    let receiver = Receiver::start();
    let created = subscribe(
        &server,
        &organization,
        json!({"url": receiver.url, "collections": ["endpoints", "vulnerability-findings"]}),
    );
    let secret = created["secret"].as_str().unwrap().to_owned();
    let from = created["position"].as_u64().unwrap();
    assert_eq!(from, latest_sequence(&server, &key));
    // Creates only (the feed keeps each record's latest change, so the
    // deliveries and the feed read afterwards agree event for event).
    let endpoints = import(
        &server,
        &organization,
        "endpoints",
        &(0..60).map(|n| endpoint(&format!("hook-{n}"))).collect::<Vec<_>>(),
    );
    for round in 0..3 {
        let findings: Vec<Value> =
            (0..70).map(|n| xz_finding(&endpoints[n % endpoints.len()], "high", &format!("r{round}-{n}"))).collect();
        import(&server, &organization, "vulnerability-findings", &findings);
    }
    let latest = latest_sequence(&server, &key);
    receiver.wait_for_sequence(latest, Duration::from_secs(60));
    let deliveries = receiver.deliveries();
    let delivered = receiver.acknowledged_events();
    let feed = feed_after(&server, &key, from, "endpoints,vulnerability-findings");
    // Every change, in commit order: 270 creates, and the endpoints'
    // updates each findings import made if a delivery read them before the
    // next import (the feed keeps each record's latest change only).
    assert_eq!(feed.len(), 270);
    assert!(delivered.len() >= 270, "{} events delivered", delivered.len());
    let sequences: Vec<u64> = delivered.iter().map(|event| event["sequence"].as_u64().unwrap()).collect();
    assert!(sequences.windows(2).all(|pair| pair[0] < pair[1]), "in commit order, each once");
    // Each record's last delivered event is the feed's, byte for byte.
    let mut last_of: std::collections::HashMap<&str, &Value> = std::collections::HashMap::new();
    for event in &delivered {
        last_of.insert(event["id"].as_str().unwrap(), event);
    }
    assert_eq!(last_of.len(), feed.len());
    for event in &feed {
        assert_eq!(last_of[event["id"].as_str().unwrap()], event, "the deliveries end as the feed stands");
    }
    let mut ids = std::collections::HashSet::new();
    for delivery in &deliveries {
        let body = delivery.json();
        assert_eq!(body["subscription_id"], created["id"]);
        let events = delivery.events();
        assert!(!events.is_empty() && events.len() <= 100, "{} events", events.len());
        assert!(delivery.body.len() <= 256 << 10);
        assert!(ids.insert(delivery.header("webhook-id").to_owned()), "each batch has an id of its own");
        assert!(delivery.header("user-agent").starts_with("esr-webhooks/"));
        assert_eq!(delivery.header("content-type"), "application/json");
    }
    assert!(deliveries.len() >= 3, "batched: {} deliveries", deliveries.len());
    assert!(verified_with(&secret, &deliveries).iter().all(|ok| *ok), "every delivery verifies");
    let wrong = "whsec_".to_owned() + &"A".repeat(43) + "=";
    assert!(verified_with(&wrong, &deliveries).iter().all(|ok| !*ok), "and none with another secret");
    let shown = show(&server, &organization, created["id"].as_str().unwrap());
    assert_eq!(shown["position"], latest);
    assert_eq!(shown["last_delivery"]["status"], 200);
    assert!(server.metric_sum("esr_webhook_deliveries_total{outcome=\"delivered\"}") >= 3.0);
    assert!(server.metric_sum("esr_webhook_delivery_lag_seconds_count") >= 3.0);

    // A rotation: both secrets sign until the overlap ends.
    let id = created["id"].as_str().unwrap();
    let rotated: Value = server
        .admin(Method::POST, &format!("{}/{id}/rotate-secret", hooks(&organization)))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let new_secret = rotated["secret"].as_str().unwrap().to_owned();
    import(&server, &organization, "endpoints", &[endpoint("after-rotation")]);
    receiver.wait_for_sequence(latest + 1, Duration::from_secs(30));
    let last = receiver.deliveries().last().unwrap().clone();
    assert_eq!(last.header("webhook-signature").split(' ').count(), 2);
    assert_eq!(verified_with(&secret, std::slice::from_ref(&last)), [true]);
    assert_eq!(verified_with(&new_secret, std::slice::from_ref(&last)), [true]);
}

#[test]
fn failures_are_retried_with_the_same_id_gone_disables_and_failing_resumes_where_it_stopped() {
    let server = Server::start_with(&plugins_dir(), &[&LOOPBACK[..], &["--webhook-retry-hours", "0.004"]].concat());
    let (organization, key) = server.organization_with_key("Retry", &["endpoints:read"]);
    // Two failures, then success.
    let receiver = Receiver::answering(|n| (if n < 2 { 503 } else { 200 }, Duration::ZERO));
    let created = subscribe(&server, &organization, json!({"url": receiver.url, "collections": ["endpoints"]}));
    let id = created["id"].as_str().unwrap().to_owned();
    import(&server, &organization, "endpoints", &[endpoint("retried")]);
    receiver.wait_for_sequence(latest_sequence(&server, &key), Duration::from_secs(60));
    let deliveries = receiver.deliveries();
    assert_eq!(deliveries.iter().map(|delivery| delivery.status).collect::<Vec<_>>(), [503, 503, 200]);
    assert!(deliveries.iter().all(|delivery| delivery.header("webhook-id") == deliveries[0].header("webhook-id")));
    assert!(deliveries.iter().all(|delivery| delivery.body == deliveries[0].body));
    // Exponential: the second wait is longer than the first's shortest.
    assert!(deliveries[1].received - deliveries[0].received >= Duration::from_millis(900));
    let attempts: Value =
        server.admin(Method::GET, &format!("{}/{id}/deliveries", hooks(&organization))).send().unwrap().json().unwrap();
    let statuses: Vec<&Value> = attempts["data"].as_array().unwrap().iter().map(|attempt| &attempt["status"]).collect();
    assert_eq!(statuses, [&json!(200), &json!(503), &json!(503)], "the newest first");
    assert!(attempts["data"][1]["error"].as_str().unwrap().contains("503"));

    // 410 Gone disables it.
    receiver.answer_with(|_| (410, Duration::ZERO));
    import(&server, &organization, "endpoints", &[endpoint("gone")]);
    wait_until(Duration::from_secs(30), "disabled by 410", || show(&server, &organization, &id)["state"] == "disabled");
    assert!(show(&server, &organization, &id)["reason"].as_str().unwrap().contains("410"));

    // Resumed against a receiver that keeps failing: retried for the
    // window (0.004 h, about 14 s), then failing; nothing is skipped.
    receiver.answer_with(|_| (500, Duration::ZERO));
    let stopped_at = show(&server, &organization, &id)["position"].as_u64().unwrap();
    let resumed = server
        .admin(Method::PATCH, &format!("{}/{id}", hooks(&organization)))
        .json(&json!({"state": "active"}))
        .send()
        .unwrap();
    assert_eq!(resumed.status(), 200);
    wait_until(Duration::from_secs(90), "failing after the retry window", || {
        show(&server, &organization, &id)["state"] == "failing"
    });
    let failing = show(&server, &organization, &id);
    assert!(failing["reason"].as_str().unwrap().contains("no delivery succeeded"), "{failing}");
    assert_eq!(failing["position"], stopped_at);
    // Back, and resumed: the events after where it stopped arrive.
    receiver.answer_with(|_| (200, Duration::ZERO));
    let before = receiver.acknowledged_events().len();
    server
        .admin(Method::PATCH, &format!("{}/{id}", hooks(&organization)))
        .json(&json!({"state": "active"}))
        .send()
        .unwrap();
    receiver.wait_for_sequence(latest_sequence(&server, &key), Duration::from_secs(30));
    let resumed_events = &receiver.acknowledged_events()[before..];
    assert_eq!(resumed_events[0]["sequence"].as_u64().unwrap(), stopped_at + 1);
    assert_eq!(resumed_events[0]["record"]["hostname"], "gone");

    // A replay delivers again from a sequence. What was received is noted
    // before asking, since the replay can arrive before the answer does.
    let before = receiver.deliveries().len();
    let earlier_ids: std::collections::HashSet<String> =
        receiver.deliveries().iter().map(|delivery| delivery.header("webhook-id").to_owned()).collect();
    let response = server
        .admin(Method::POST, &format!("{}/{id}/replay", hooks(&organization)))
        .json(&json!({"from_sequence": 0}))
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    wait_until(Duration::from_secs(30), "the replay", || {
        receiver.deliveries()[before..]
            .iter()
            .any(|delivery| delivery.events().iter().any(|event| event["record"]["hostname"] == "retried"))
    });
    // A replay is new batches under new ids (a receiver deduplicating on
    // `webhook-id` would drop a batch sent again under an old one).
    assert!(
        receiver.deliveries()[before..].iter().all(|delivery| !earlier_ids.contains(delivery.header("webhook-id")))
    );
    let response = server
        .admin(Method::POST, &format!("{}/{id}/replay", hooks(&organization)))
        .json(&json!({"from_sequence": 1_000_000}))
        .send()
        .unwrap();
    assert_eq!(response.status(), 400);
}

/// A description changed alone keeps the batch in flight and its
/// `webhook-id` (receivers deduplicate on it); a new URL starts without the
/// old destination's backoff.
#[test]
fn a_description_change_keeps_the_batch_s_id_and_a_new_url_its_own_backoff() {
    let server = Server::start_with(&plugins_dir(), &LOOPBACK);
    let (organization, key) = server.organization_with_key("Described", &["endpoints:read"]);
    let receiver = Receiver::answering(|n| (if n < 1 { 503 } else { 200 }, Duration::ZERO));
    let created = subscribe(&server, &organization, json!({"url": receiver.url, "collections": ["endpoints"]}));
    let id = created["id"].as_str().unwrap().to_owned();
    let patch = |body: Value| {
        let response =
            server.admin(Method::PATCH, &format!("{}/{id}", hooks(&organization))).json(&body).send().unwrap();
        assert_eq!(response.status(), 200);
    };
    import(&server, &organization, "endpoints", &[endpoint("described")]);
    wait_until(Duration::from_secs(30), "the first attempt", || !receiver.deliveries().is_empty());
    patch(json!({"description": "renamed while retrying"}));
    receiver.wait_for_sequence(latest_sequence(&server, &key), Duration::from_secs(60));
    let deliveries = receiver.deliveries();
    assert_eq!(deliveries.iter().map(|delivery| delivery.status).collect::<Vec<_>>(), [503, 200]);
    assert_eq!(deliveries[1].header("webhook-id"), deliveries[0].header("webhook-id"));

    // Failing, then sent elsewhere: the new URL is tried at once.
    receiver.answer_with(|_| (500, Duration::ZERO));
    import(&server, &organization, "endpoints", &[endpoint("moved")]);
    wait_until(Duration::from_secs(30), "a failed attempt", || {
        show(&server, &organization, &id)["next_attempt_at"].is_string()
    });
    let elsewhere = Receiver::answering(|_| (200, Duration::ZERO));
    patch(json!({"url": elsewhere.url}));
    let moved = show(&server, &organization, &id);
    assert_eq!((moved["failed_attempts"].as_u64(), moved["next_attempt_at"].is_null()), (Some(0), true), "{moved}");
    elsewhere.wait_for_sequence(latest_sequence(&server, &key), Duration::from_secs(30));
}

#[test]
fn operations_and_filters_choose_the_events_as_the_list_does() {
    let server = Server::start_with(&plugins_dir(), &LOOPBACK);
    let (organization, key) = server.organization_with_key("Filters", &["endpoints:read", "findings:read"]);
    let receiver = Receiver::start();
    let created = subscribe(
        &server,
        &organization,
        json!({
            "url": receiver.url, "collections": ["vulnerability-findings"], "operations": ["created", "deleted"],
            "filters": {"vulnerability-findings": "severity=critical"},
        }),
    );
    let id = created["id"].as_str().unwrap().to_owned();
    let hosts = import(&server, &organization, "endpoints", &[endpoint("filtered")]);
    let severities = ["critical", "low", "critical", "medium", "high", "critical"];
    let lines: Vec<Value> =
        severities.iter().enumerate().map(|(n, severity)| xz_finding(&hosts[0], severity, &format!("f{n}"))).collect();
    let ids = import(&server, &organization, "vulnerability-findings", &lines);
    // Delivered before the update (else the feed would hold only the update).
    let created_through = latest_sequence(&server, &key);
    wait_until(Duration::from_secs(60), "the creations delivered", || {
        show(&server, &organization, &id)["position"].as_u64().unwrap() >= created_through
    });
    // An update of a critical one is not wanted; a deletion is.
    let mut updated = lines[0].clone();
    updated["id"] = json!(ids[0]);
    updated["title"] = json!("retitled");
    import(&server, &organization, "vulnerability-findings", &[updated]);
    let deleted = server
        .admin(Method::DELETE, &format!("/admin/v1/organizations/{organization}/vulnerability-findings/{}", ids[1]))
        .send()
        .unwrap();
    assert_eq!(deleted.status(), 204);
    let marker =
        import(&server, &organization, "vulnerability-findings", &[xz_finding(&hosts[0], "critical", "marker")]);
    // The subscription's position passes every later event, wanted or not.
    let latest = latest_sequence(&server, &key);
    wait_until(Duration::from_secs(60), "the position at the latest event", || {
        show(&server, &organization, &id)["position"].as_u64().unwrap() >= latest
    });
    let events = receiver.acknowledged_events();
    let summary: Vec<(String, String)> = events
        .iter()
        .map(|event| (event["operation"].as_str().unwrap().to_owned(), event["id"].as_str().unwrap().to_owned()))
        .collect();
    let expected: Vec<(String, String)> = vec![
        ("created".into(), ids[0].clone()),
        ("created".into(), ids[2].clone()),
        ("created".into(), ids[5].clone()),
        ("deleted".into(), ids[1].clone()),
        ("created".into(), marker[0].clone()),
    ];
    // ids[0]'s update (to a critical finding) is not wanted.
    assert_eq!(summary, expected);
    // The same filter on the list names the same records.
    let listed: Value = server
        .client
        .get(server.url("/v1/vulnerability-findings?severity=critical&limit=100"))
        .bearer_auth(&key)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let critical: Vec<&str> =
        listed["data"].as_array().unwrap().iter().map(|record| record["id"].as_str().unwrap()).collect();
    for (operation, id) in &expected {
        if operation == "created" {
            assert!(critical.contains(&id.as_str()));
        }
    }
}

#[test]
fn private_and_local_destinations_are_refused_with_a_reason() {
    let server = Server::start_with(&plugins_dir(), &["--webhooks-allow-http"]);
    let (organization, key) = server.organization_with_key("Guarded", &["endpoints:read"]);
    for address in [
        "127.0.0.1",
        "10.0.0.8",
        "172.16.4.4",
        "192.168.0.1",
        "169.254.169.254",
        "100.64.0.1",
        "224.0.0.1",
        "0.0.0.0",
        "[::1]",
        "[fd00::1]",
        "[fe80::1]",
        "[::ffff:127.0.0.1]",
        "[::ffff:10.0.0.1]",
        "[::]",
    ] {
        let response = server
            .admin(Method::POST, &hooks(&organization))
            .json(&json!({"url": format!("http://{address}/hook"), "collections": ["endpoints"]}))
            .send()
            .unwrap();
        assert_eq!(response.status(), 400, "{address}");
        let problem: Value = response.json().unwrap();
        assert!(
            problem["invalid_params"][0]["reason"].as_str().unwrap().contains("webhooks go only to public addresses"),
            "{problem}"
        );
    }
    // A name that resolves to loopback is refused when it is connected to,
    // on the subscription, not by crashing anything.
    let receiver = Receiver::start();
    let port = receiver.url.rsplit(':').next().unwrap().to_owned();
    let created = subscribe(
        &server,
        &organization,
        json!({"url": format!("http://localhost:{port}"), "collections": ["endpoints"]}),
    );
    import(&server, &organization, "endpoints", &[endpoint("ssrf")]);
    let id = created["id"].as_str().unwrap();
    wait_until(Duration::from_secs(30), "the refusal on the subscription", || {
        show(&server, &organization, id)["last_error"]["error"].is_string()
    });
    let error = show(&server, &organization, id)["last_error"]["error"].as_str().unwrap().to_owned();
    assert!(error.contains("127.0.0.1 (loopback)") || error.contains("::1 (loopback)"), "{error}");
    assert!(receiver.deliveries().is_empty(), "nothing reached the loopback receiver");
    assert!(server.metric_sum("esr_webhook_deliveries_total{outcome=\"refused_destination\"}") >= 1.0);
    assert_eq!(server.get("/v1/health").status(), 200);
    let _ = key;
}

#[test]
fn redirects_are_not_followed() {
    let server = Server::start_with(&plugins_dir(), &LOOPBACK);
    let (organization, key) = server.organization_with_key("Redirect", &["endpoints:read"]);
    let target = Receiver::start();
    let target_url = target.url.clone();
    let redirecting = Receiver::answering(|_| (307, Duration::ZERO));
    let _ = target_url;
    let created = subscribe(&server, &organization, json!({"url": redirecting.url, "collections": ["endpoints"]}));
    import(&server, &organization, "endpoints", &[endpoint("redirected")]);
    let id = created["id"].as_str().unwrap();
    wait_until(Duration::from_secs(30), "a failed attempt", || {
        show(&server, &organization, id)["failed_attempts"].as_u64() >= Some(1)
    });
    assert!(show(&server, &organization, id)["last_error"]["error"].as_str().unwrap().contains("307"));
    assert!(target.deliveries().is_empty());
    let _ = key;
}

#[test]
fn a_hanging_receiver_delays_only_its_own_subscription() {
    let server = Server::start_with(&plugins_dir(), &[&LOOPBACK[..], &["--webhook-timeout-secs", "20"]].concat());
    let (organization, key) = server.organization_with_key("Slow", &["endpoints:read"]);
    let hanging = Receiver::answering(|_| (200, Duration::from_secs(120)));
    let fast = Receiver::start();
    subscribe(&server, &organization, json!({"url": hanging.url, "collections": ["endpoints"]}));
    subscribe(&server, &organization, json!({"url": fast.url, "collections": ["endpoints"]}));
    for n in 0..5 {
        import(&server, &organization, "endpoints", &[endpoint(&format!("lagging-{n}"))]);
        let sequence = latest_sequence(&server, &key);
        let started = std::time::Instant::now();
        fast.wait_for_sequence(sequence, Duration::from_secs(20));
        // A generous bound for a loaded machine: the hanging receiver
        // holds its delivery for 20 s.
        assert!(started.elapsed() < Duration::from_secs(10), "the fast receiver waited {:?}", started.elapsed());
    }
    assert_eq!(server.get("/v1/health").status(), 200);
}

#[test]
fn a_host_killed_mid_delivery_loses_and_reorders_nothing() {
    let data_dir = common::private_tempdir();
    let flags = [&LOOPBACK[..], &["--webhook-timeout-secs", "5"]].concat();
    let receiver = Receiver::answering(|_| (200, Duration::from_millis(150)));
    let mut server = Server::start_on_with(&plugins_dir(), data_dir.path(), &flags);
    let (organization, key) = server.organization_with_key("Killed", &["endpoints:read"]);
    subscribe(&server, &organization, json!({"url": receiver.url, "collections": ["endpoints"]}));
    let mut hostnames = Vec::new();
    for round in 0..4 {
        let lines: Vec<Value> = (0..150).map(|n| endpoint(&format!("k{round}-{n}"))).collect();
        hostnames.extend(lines.iter().map(|line| line["hostname"].as_str().unwrap().to_owned()));
        import(&server, &organization, "endpoints", &lines);
        // Kill it while batches are in flight.
        wait_until(Duration::from_secs(30), "a delivery of this round", || {
            receiver
                .acknowledged_events()
                .iter()
                .any(|event| event["record"]["hostname"].as_str().unwrap().starts_with(&format!("k{round}-")))
        });
        server.signal("KILL");
        server.stop();
        server = Server::start_on_with(&plugins_dir(), data_dir.path(), &flags);
    }
    let latest = latest_sequence(&server, &key);
    receiver.wait_for_sequence(latest, Duration::from_secs(120));
    // Every event at least once; in order but for a batch sent again whole,
    // under the id it had.
    let deliveries: Vec<Delivery> =
        receiver.deliveries().into_iter().filter(|delivery| (200..300).contains(&delivery.status)).collect();
    let mut seen = std::collections::HashSet::new();
    let mut highest = 0u64;
    let mut ids_of_batches: std::collections::HashMap<String, Vec<u8>> = std::collections::HashMap::new();
    for delivery in &deliveries {
        let id = delivery.header("webhook-id").to_owned();
        if let Some(body) = ids_of_batches.get(&id) {
            assert_eq!(body, &delivery.body, "a batch sent again is the same batch");
            continue;
        }
        ids_of_batches.insert(id, delivery.body.clone());
        for event in delivery.events() {
            let sequence = event["sequence"].as_u64().unwrap();
            assert!(sequence > highest, "sequence {sequence} after {highest}: reordered");
            highest = sequence;
            seen.insert(event["record"]["hostname"].as_str().unwrap().to_owned());
        }
    }
    for hostname in &hostnames {
        assert!(seen.contains(hostname), "{hostname} was never delivered");
    }
}

/// Two hosts on one PostgreSQL database: one delivers a subscription at a
/// time; killed, the other takes over within the lease and loses nothing.
#[test]
fn on_postgresql_one_host_delivers_and_another_takes_over_when_it_dies() {
    let database = common::postgres::TestDatabase::new();
    let flags = [
        "--database",
        database.url.as_str(),
        "--webhooks-allow-http",
        "--webhooks-allow-private",
        "--webhook-timeout-secs",
        "2",
        "--webhook-lease-secs",
        "7",
    ];
    let a = Server::start_with(&plugins_dir(), &flags);
    let b_dir = common::private_tempdir();
    std::fs::copy(a.data_dir().join("demo-keys.json"), b_dir.path().join("demo-keys.json")).unwrap();
    let b = Server::start_on_with(&plugins_dir(), b_dir.path(), &flags);
    std::fs::copy(a.data_dir().join("admin-token"), b_dir.path().join("admin-token")).unwrap();
    let (organization, key) = a.organization_with_key("Shared", &["endpoints:read"]);
    let receiver = Receiver::answering(|_| (200, Duration::from_millis(50)));
    let created = subscribe(&b, &organization, json!({"url": receiver.url, "collections": ["endpoints"]}));
    let id = created["id"].as_str().unwrap().to_owned();
    let mut hostnames = Vec::new();
    for round in 0..6 {
        let lines: Vec<Value> = (0..40).map(|n| endpoint(&format!("pg{round}-{n}"))).collect();
        hostnames.extend(lines.iter().map(|line| line["hostname"].as_str().unwrap().to_owned()));
        let through = if round % 2 == 0 { &a } else { &b };
        import(through, &organization, "endpoints", &lines);
    }
    receiver.wait_for_sequence(latest_sequence(&b, &key), Duration::from_secs(60));
    // One host delivered: while it held the lease, the other sent nothing.
    let attempts: Value =
        b.admin(Method::GET, &format!("{}/{id}/deliveries", hooks(&organization))).send().unwrap().json().unwrap();
    let hosts: std::collections::BTreeSet<&str> =
        attempts["data"].as_array().unwrap().iter().map(|attempt| attempt["host"].as_str().unwrap()).collect();
    assert_eq!(hosts.len(), 1, "one host delivers: {hosts:?}");
    let delivering = hosts.into_iter().next().unwrap().to_owned();
    let a_delivers = a.health_details()["host"] == delivering;
    let (mut killed, survivor) = if a_delivers { (a, b) } else { (b, a) };
    // The delivering host dies; the survivor takes over within the lease.
    killed.signal("KILL");
    killed.stop();
    let survivor = &survivor;
    let lines: Vec<Value> = (0..30).map(|n| endpoint(&format!("after-{n}"))).collect();
    hostnames.extend(lines.iter().map(|line| line["hostname"].as_str().unwrap().to_owned()));
    import(survivor, &organization, "endpoints", &lines);
    let started = std::time::Instant::now();
    receiver.wait_for_sequence(latest_sequence(survivor, &key), Duration::from_secs(60));
    // The lease (7 s) and a few polls; generous for a loaded machine.
    assert!(started.elapsed() < Duration::from_secs(30), "taken over after {:?}", started.elapsed());
    let delivered: Vec<String> = receiver
        .acknowledged_events()
        .iter()
        .map(|event| event["record"]["hostname"].as_str().unwrap().to_owned())
        .collect();
    for hostname in &hostnames {
        assert!(delivered.contains(hostname), "{hostname} never delivered");
    }
    let sequences: Vec<u64> =
        receiver.acknowledged_events().iter().map(|event| event["sequence"].as_u64().unwrap()).collect();
    assert!(sequences.windows(2).all(|pair| pair[0] < pair[1]), "in order, each once: {sequences:?}");
}

/// Webhook work has database connections of its own: with the public
/// API's pool at two connections, a host delivering to 24 subscriptions
/// (slow receivers, large batches) answers every API request, none shed
/// for want of a connection.
#[test]
fn deliveries_never_take_the_public_api_s_connections() {
    let database = common::postgres::TestDatabase::new();
    let flags = [
        "--database",
        database.url.as_str(),
        "--database-pool-size",
        "2",
        "--webhooks-allow-http",
        "--webhooks-allow-private",
        "--webhook-concurrency",
        "24",
        "--webhook-concurrency-per-organization",
        "4",
    ];
    let server = Server::start_with(&plugins_dir(), &flags);
    let receiver = Receiver::answering(|_| (200, Duration::from_millis(100)));
    let mut organizations = Vec::new();
    for n in 0..6 {
        let (organization, key) = server.organization_with_key(&format!("Busy {n}"), &["endpoints:read"]);
        for _ in 0..4 {
            subscribe(&server, &organization, json!({"url": receiver.url, "collections": ["endpoints"]}));
        }
        let lines: Vec<Value> = (0..300).map(|i| endpoint(&format!("busy-{n}-{i}"))).collect();
        import(&server, &organization, "endpoints", &lines);
        organizations.push((organization, key));
    }
    // 6 organizations × 4 subscriptions × 300 events are being delivered;
    // meanwhile Acme reads.
    let client = reqwest::blocking::Client::new();
    let mut latencies = Vec::new();
    let mut statuses = std::collections::BTreeMap::new();
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(8) {
        let asked = std::time::Instant::now();
        let response = client.get(server.url("/v1/scopes?limit=10")).bearer_auth(&server.keys[0]).send().unwrap();
        latencies.push(asked.elapsed());
        *statuses.entry(response.status().as_u16()).or_insert(0) += 1;
    }
    assert!(receiver.deliveries().len() >= 24, "the deliveries were under way: {}", receiver.deliveries().len());
    assert_eq!(statuses.keys().copied().collect::<Vec<_>>(), [200], "{statuses:?}");
    latencies.sort();
    let p99 = latencies[(latencies.len() * 99).div_ceil(100) - 1];
    // Generous for a loaded machine: a request never waited for a
    // connection a delivery held (that wait ends at 2 s with a 503).
    assert!(p99 < Duration::from_millis(1500), "p99 {p99:?} over {} requests", latencies.len());
}

#[test]
fn a_position_the_feed_no_longer_holds_says_how_to_resync() {
    let server = Server::start_with(&plugins_dir(), &[&LOOPBACK[..], &["--change-retention-days", "0"]].concat());
    let (organization, key) = server.organization_with_key("Retention", &["endpoints:read"]);
    let receiver = Receiver::start();
    let created = subscribe(&server, &organization, json!({"url": receiver.url, "collections": ["endpoints"]}));
    let id = created["id"].as_str().unwrap().to_owned();
    let paused = server
        .admin(Method::PATCH, &format!("{}/{id}", hooks(&organization)))
        .json(&json!({"state": "paused"}))
        .send()
        .unwrap();
    assert_eq!(paused.status(), 200);
    let ids = import(&server, &organization, "endpoints", &[endpoint("pruned-1"), endpoint("pruned-2")]);
    for removed in &ids {
        let response = server
            .admin(Method::DELETE, &format!("/admin/v1/organizations/{organization}/endpoints/{removed}"))
            .send()
            .unwrap();
        assert_eq!(response.status(), 204);
    }
    // Deletions are pruned within seconds at retention 0.
    wait_until(Duration::from_secs(60), "the deletions pruned", || {
        let response = server
            .client
            .get(server.url(&format!("/v1/changes?after={}", created["position"])))
            .bearer_auth(&key)
            .send()
            .unwrap();
        response.status() == 410
    });
    server
        .admin(Method::PATCH, &format!("{}/{id}", hooks(&organization)))
        .json(&json!({"state": "active"}))
        .send()
        .unwrap();
    wait_until(Duration::from_secs(30), "failing", || show(&server, &organization, &id)["state"] == "failing");
    let reason = show(&server, &organization, &id)["reason"].as_str().unwrap().to_owned();
    assert!(reason.contains("no longer holds position") && reason.contains("replay"), "{reason}");
    assert!(receiver.deliveries().is_empty());
    // A replay from before the pruned deletions is refused, saying why.
    let response = server
        .admin(Method::POST, &format!("{}/{id}/replay", hooks(&organization)))
        .json(&json!({"from_sequence": created["position"]}))
        .send()
        .unwrap();
    assert_eq!(response.status(), 409);
    // From the latest sequence (after a re-sync) it is active again.
    let latest = latest_sequence(&server, &key);
    let response = server
        .admin(Method::POST, &format!("{}/{id}/replay", hooks(&organization)))
        .json(&json!({"from_sequence": latest}))
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(show(&server, &organization, &id)["state"], "active");
}

/// A receiver answering `200` with an endless body: the delivery counts,
/// and the server stops reading after 64 KiB (the receiver can write no
/// more than that and the sockets' buffers).
#[test]
fn only_the_start_of_an_answer_is_read() {
    use std::io::{BufRead, BufReader, Read};
    let server = Server::start_with(&plugins_dir(), &LOOPBACK);
    let (organization, key) = server.organization_with_key("Endless", &["endpoints:read"]);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}/hook", listener.local_addr().unwrap().port());
    let written = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = written.clone();
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line.trim_end().is_empty() {
                break;
            }
            if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = value.trim().parse().unwrap();
            }
        }
        reader.read_exact(&mut vec![0; length]).unwrap();
        let mut stream = stream;
        stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1073741824\r\n\r\n").unwrap();
        let chunk = vec![b'x'; 64 << 10];
        while stream.write_all(&chunk).is_ok() {
            counted.fetch_add(chunk.len(), std::sync::atomic::Ordering::Relaxed);
        }
    });
    let created = subscribe(&server, &organization, json!({"url": url, "collections": ["endpoints"]}));
    import(&server, &organization, "endpoints", &[endpoint("endless")]);
    let id = created["id"].as_str().unwrap();
    let latest = latest_sequence(&server, &key);
    wait_until(Duration::from_secs(30), "the delivery acknowledged", || {
        show(&server, &organization, id)["position"].as_u64() == Some(latest)
    });
    std::thread::sleep(Duration::from_secs(1));
    let sent = written.load(std::sync::atomic::Ordering::Relaxed);
    assert!(sent < 32 << 20, "the receiver wrote {sent} bytes: the server kept reading");
    assert_eq!(show(&server, &organization, id)["last_delivery"]["status"], 200);
}
